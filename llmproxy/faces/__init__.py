"""The wire APIs clients speak, each a pair of pure translations onto the one pipeline.

    chat/        OpenAI's chat completions (POST /v1/chat/completions): the pipeline's own request and
                 answer, streamed as chunks; OpenAI's error envelope
    completions/ OpenAI's text completions (POST /v1/completions): a raw prompt, no function calling
    responses/   OpenAI's Responses API (POST /v1/responses): Codex CLI, openai-agents
    messages/    Anthropic's Messages API (POST /v1/messages): Claude Code, the anthropic SDK
    embeddings/  OpenAI's embeddings API (POST /v1/embeddings): MemGPT's and Letta's archival memory
    lark.py      a custom tool's Lark grammar as a regular expression (Codex's apply_patch)
    content.py   what stands in for content a text model cannot read
    wire.py      JSON and server-sent events as the faces write them

A face turns its request into the internal ``ChatRequest`` and the pipeline's ``ChatCompletion`` (or
its stream of chat chunks) back into its own response, events and error envelope. It writes the chat
request as plain data, checked field by field as it was read, for one ``ChatRequest`` validation:
pydantic builds the messages several times faster at once than one by one. Rendering, grammar,
repair, the second chance, admission, fallbacks and metrics are the pipeline's and the server's, never
a face's. Nothing here does I/O and nothing imports the server: the server's endpoint classes
(llmproxy.server.endpoints) host the faces and drive them.
"""
