"""The HTTP server in front of llmproxy's pipeline (``llmproxy serve``), hosting the faces (llmproxy.faces):
OpenAI's chat and text completions and Responses API, and Anthropic's Messages API.

    app.py               the FastAPI app: endpoints, the fast path for generation POSTs, ``run``
    endpoints.py         one class per generation endpoint, in the stages draft -> plan -> finish
    responses_face.py    POST /v1/responses: OpenAI's Responses API, translated (llmproxy.faces.responses)
    messages_face.py     POST /v1/messages: Anthropic's Messages API, translated (llmproxy.faces.messages)
    response_store.py    stored Responses API turns (previous_response_id), bounded by bytes and age
    lanes.py             how each backend is called: on the event loop (HTTP) or its own worker threads
                         (embedded); token counting, probes
    admission.py         how many requests a backend runs and queues; 429 with Retry-After past them
    fallbacks.py         which failures hand a request to a model's fallbacks, and how the answer says so
    pools/               a model served by several backends: load, health, stickiness, the choice of one
    reload.py            the config file read again on SIGHUP, without dropping a request
    responses.py         answering at once or as a server-sent event stream
    disconnects.py       stopping the work for a client that went away
    models.py            which route answers a request's model name; /v1/models
    intake.py            API key and request body checks (JSON only)
    hosts.py             the Host names it answers to (DNS rebinding)
    connections.py       deadlines for what clients send, and a cap on connections (uvicorn's protocol)
    config.py            server settings, routes and their limits from a TOML file or flags
    request_ids.py       x-request-id on every response
    request_log.py       one log line per request
    inspector/           the page at /inspect: models, live requests, every step of one, run it again
    metrics.py           Prometheus metrics at /metrics

Nothing is imported here: ``llmproxy.server.config`` is read by commands that never serve, and must
not pull in the web framework. The app is ``llmproxy.server.app.create_app``.
"""
