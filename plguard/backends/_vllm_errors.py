"""vLLM failures as plguard errors, shared by the batched and the streaming vLLM paths."""

from __future__ import annotations

from plguard.errors import BackendDeadError, BackendError


def call_error(exc: BaseException, what: str, model_id: str) -> BackendError:
    # vLLM raises EngineDeadError once its engine process is gone (killed, crashed, or
    # stopped by a Ctrl-C sent to the whole process group); every later call fails too.
    if type(exc).__name__ == "EngineDeadError":
        return BackendDeadError(f"the vLLM engine of {model_id} has stopped during {what} "
                                "(interrupted, killed or crashed); nothing more can run on "
                                "it. Records written so far are kept: rerun to resume.")
    return BackendError(f"vLLM {what} failed on {model_id}: {type(exc).__name__}: {exc}")


__all__ = ["call_error"]
