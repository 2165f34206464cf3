"""OpenAI's text completions (POST /v1/completions): a raw prompt sent to the backend as it is.

    request    the request and response models, and the plan and finish stages of a raw completion
    chunks     a streamed completion's chunks (framed as the chat face frames its own)

The server's endpoint class (llmproxy.server.endpoints) drives them.
"""
