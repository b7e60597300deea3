# Command-line tests of resuming, output directories and exit statuses (specgen_cli_test, from CMakeLists.txt).
