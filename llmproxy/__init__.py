"""llmproxy: OpenAI function calling for local models."""
