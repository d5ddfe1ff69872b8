from kdtree_cli.app import main

main()
