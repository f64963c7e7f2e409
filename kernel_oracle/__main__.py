from kernel_oracle.cli import main

raise SystemExit(main())
