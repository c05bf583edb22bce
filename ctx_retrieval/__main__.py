from ctx_retrieval.cli import main

raise SystemExit(main())
