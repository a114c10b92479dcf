"""What the retrieval server accepts in one request, in a module of its own: the env checks its actions against the
same limits without importing the server (http.server, the BM25 index and its stemmer)."""

MAX_TOP_K = 50
MAX_QUERY_CHARS = 2000
