"""Thin: the code is plguard_lab.studies.heads.by_source (same arguments); see its docstring."""

from plguard_lab.studies.heads.by_source import main

if __name__ == "__main__":
    main()
