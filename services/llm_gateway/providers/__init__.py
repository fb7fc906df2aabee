"""Model providers, one file each, behind `base.Provider`: openai (any OpenAI-compatible endpoint),
local (bundled SmolLM2 + all-MiniLM-L6-v2), scripted (deterministic, for tests and demos)."""
