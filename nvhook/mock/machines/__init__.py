"""The shipped machine profiles, one TOML file per machine (a package so they ship as data)."""
