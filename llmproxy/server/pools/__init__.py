"""Pools: one model served by several interchangeable backends, balanced by the load they report,
checked for health in the background, sticky per conversation.

    spec      a pool as configured (plain values; read by llmproxy.server.config)
    build     the start-up check that members render and count alike
    load      what a backend reports of its own load (llama.cpp /slots or /metrics, vLLM /metrics)
    health    in, or out for a growing cool-down; which failures are the member's
    members   a member's state at run time
    servers   a member's server that llmproxy starts from its command, and stops after the ttl
    sticky    conversation keys, and the bounded map of conversation -> member
    choice    which member takes a request
    pool      a pool's members, its queue and its background checks
    lane      one request's lane into a pool, and its move to another member when its member fails

Import the modules themselves: this package's ``__init__`` stays empty so that llmproxy.server.config
can read ``spec`` and ``build`` without the server's machinery.
"""
