"""LLM gateway: the one place that talks to model providers (chat with tools, embeddings, rerank).

Callers in other services use `services.llm_gateway.client.LlmClient` over gRPC; the domain types they
exchange are in `services.llm_gateway.models`.
"""
