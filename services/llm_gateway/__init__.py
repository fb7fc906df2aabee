"""LLM gateway: the one place that talks to model providers (chat with tools, embeddings, rerank).

Other services call it through `services.clients.LlmClient` (services/clients/llm.py), which needs none
of this package; the types they exchange are the contract's, in services/clients/llm_models.py.
"""
