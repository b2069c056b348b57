import types

import plguard


def test_all_exports_resolve_and_are_complete():
    for name in plguard.__all__:
        assert getattr(plguard, name) is not None, name
    # Submodules become attributes once imported anywhere; they are not the public surface.
    public = {n for n in dir(plguard) if not n.startswith("_")
              and not isinstance(getattr(plguard, n), types.ModuleType)} | set(plguard._LAZY)
    assert public - {"annotations", "TYPE_CHECKING", "Any"} <= set(plguard.__all__)
    assert len(plguard.__all__) == len(set(plguard.__all__))
