"""Thin: the code is plguard_lab.studies.heads.transfer (same arguments); see its docstring."""

from plguard_lab.studies.heads.transfer import main

if __name__ == "__main__":
    main()
