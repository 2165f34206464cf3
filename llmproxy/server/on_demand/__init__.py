"""Many models behind one endpoint, loaded on demand: in-process GGUFs, servers started from their
command, Ollama's and llama.cpp router's models loaded on command (a pool's members started from their
command: llmproxy.server.pools.servers).

    spec        what the config says (ModelPlan, OnDemandSpec), model files, command lines
    scheduler   which model is loaded when, within the memory budget, without thrashing
    lane        a request's way to its model: a ticket from the scheduler, then the model's own queue
    controls    loading the embedded model in this process (its memory measured)
    process     a backend server started from its command, stopped, restarted after it dies
    remote      Ollama's keep_alive and llama.cpp router's /models/load and /models/unload
    lmstudio    LM Studio's own loading: the ttl sent with each request, the state it reports
    service     the models of a server together: lanes, facts for /v1/models, log lines
    endpoints   POST /models/load and /models/unload, behind the API key
    metrics     their state, memory, loads, swaps and unloads in /metrics
    sizes       "6GiB", a process's resident memory, a GGUF's footprint guessed
"""

from llmproxy.server.on_demand.spec import ModelPlan, OnDemandSpec

__all__ = ["ModelPlan", "OnDemandSpec"]
