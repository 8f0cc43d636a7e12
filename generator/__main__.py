from generator.tools.cli import main

raise SystemExit(main())
