"""The prompt-rendering stage: takes a chat request and a wrapper (a prompt format: TOML + Jinja from
wrappers/, or ``"auto"``: the model's own chat template from its GGUF file or server), gives the raw
prompt the model was trained on, with its stop strings and the assistant prefix (``Rendered``).

* ``_wrappers``: wrappers as data, found on the search path, rendered in one sandboxed Jinja
  ``environment``; client text neutralised so it cannot forge the wrapper's markers;
* ``_model_template``: ``wrapper = "auto"``, a model's own Hugging Face template used as the wrapper;
* ``_template_roles``: the roles such a template takes, and the conversation reshaped to fit them;
* ``_leaks``: the wrappers' own words (instructions, placeholders) and the pipeline's notes, found in an answer.
"""

from llmproxy.prompts._model_template import (
    AUTO,
    MAX_TEMPLATE_BYTES,
    NAME_A_WRAPPER,
    ModelTemplateError,
    ModelTemplateWrapper,
    backend_wrapper,
    model_wrapper,
)
from llmproxy.prompts._leaks import leaked
from llmproxy.prompts._wrappers import (
    Rendered,
    Resolved,
    Wrapper,
    WrapperSpec,
    clear_caches,
    cut_at_markers,
    load_wrapper,
    neutralise,
    neutralise_json,
    template_path,
    wrapper_specs,
)

__all__ = [
    "AUTO",
    "MAX_TEMPLATE_BYTES",
    "NAME_A_WRAPPER",
    "ModelTemplateError",
    "ModelTemplateWrapper",
    "Rendered",
    "Resolved",
    "Wrapper",
    "WrapperSpec",
    "backend_wrapper",
    "clear_caches",
    "cut_at_markers",
    "leaked",
    "load_wrapper",
    "model_wrapper",
    "neutralise",
    "neutralise_json",
    "template_path",
    "wrapper_specs",
]
