"""``python -m codegrpo.budget``: :func:`codegrpo.budget.report.main`."""

from codegrpo.budget.report import main

raise SystemExit(main())
