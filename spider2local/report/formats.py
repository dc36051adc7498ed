"""The formats ``spider2local report`` writes (a module of its own: the command line imports it
at start-up, before anything heavy)."""

REPORT_FORMATS = ("terminal", "markdown", "json", "junit", "html")
