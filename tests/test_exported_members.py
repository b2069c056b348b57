import plguard


def test_all_exports_resolve_and_are_complete():
    for name in plguard.__all__:
        assert getattr(plguard, name) is not None, name
    public = {n for n in dir(plguard) if not n.startswith("_")} | set(plguard._LAZY)
    modules = {"backends", "config", "decide", "errors", "guard", "messages", "repair", "types",
               "policy", "grounding", "models", "cli", "evals", "server"}
    assert public - modules - {"annotations", "TYPE_CHECKING", "Any"} <= set(plguard.__all__)
