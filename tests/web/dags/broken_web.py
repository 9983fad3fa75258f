"""A module that fails to import: the DAG list shows it under "broken"."""

import no_such_module_for_web_tests  # noqa: F401
