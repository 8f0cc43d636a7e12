from clforge.tools.cli import main

raise SystemExit(main())
