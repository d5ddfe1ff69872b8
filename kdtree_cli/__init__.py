"""The `kdtree` command line: build, test, run, deploy and monitor the DDTree engines."""
