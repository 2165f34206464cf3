"""OpenAI's chat completions (POST /v1/chat/completions), the face the pipeline speaks natively: its
request is llmproxy.types' ``ChatRequest`` and its answer the pipeline's ``ChatCompletion``.

    chunks     a streamed answer's chunks, and OpenAI's framing of them as server-sent events
    envelope   an exception as an HTTP status and OpenAI's error envelope (the server's for every error
               outside another face's own)

Pure translations: the server's endpoint class (llmproxy.server.endpoints) drives them.
"""
