"""For consumers of a published branch: reading its documents (:mod:`.load`), and querying its
specs (:mod:`.query`) by version (:mod:`.versions`) and target (:mod:`crawler.targets`, archspec).
Nothing here writes to the output."""
