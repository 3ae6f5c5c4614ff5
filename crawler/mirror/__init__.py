"""Reading a mirror: its discovery document, its URLs, and fetching files over HTTP(S) or from a
local folder."""
