# Command-line tests of hostile and careless input (specgen_cli_test, from CMakeLists.txt).
