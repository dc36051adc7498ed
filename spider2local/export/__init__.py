"""Runs exported to other tools' formats (``spider2local export``): read from the run folder's
records alone (:mod:`.records`), written with each tool's own library, an optional extra."""
