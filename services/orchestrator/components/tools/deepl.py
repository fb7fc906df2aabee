"""DeepL, as RAGFlow's `agent/tools/deepl.py`, over DeepL's v2 API (what the `deepl` library calls).

`POST {base}/v2/translate` with `Authorization: DeepL-Auth-Key <key>` and `{"text": [query], "source_lang",
"target_lang"}` (RAGFlow's defaults ZH -> EN-GB); the translation is `formalized_content` and the
observation. Key: the component's `auth_key` (RAGFlow's param; its "xxx" placeholder counts as none),
else DEEPL_API_KEY. As in the library, a key ending in ":fx" (free plan) goes to
TRELLIS_DEEPL_FREE_BASE_URL (default https://api-free.deepl.com), others to TRELLIS_DEEPL_BASE_URL
(default https://api.deepl.com).
"""
from __future__ import annotations

import os
from typing import Any

from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext, register
from services.orchestrator.components.tools._web import WebTool

SOURCE_LANGS = ("AR", "BG", "CS", "DA", "DE", "EL", "EN", "ES", "ET", "FI", "FR", "HU", "ID", "IT", "JA", "KO", "LT",
                "LV", "NB", "NL", "PL", "PT", "RO", "RU", "SK", "SL", "SV", "TR", "UK", "ZH")
TARGET_LANGS = ("AR", "BG", "CS", "DA", "DE", "EL", "EN-GB", "EN-US", "ES", "ET", "FI", "FR", "HU", "ID", "IT", "JA",
                "KO", "LT", "LV", "NB", "NL", "PL", "PT-BR", "PT-PT", "RO", "RU", "SK", "SL", "SV", "TR", "UK", "ZH")


@register
class DeepL(WebTool):
    component_name = "DeepL"
    service = "DEEPL"
    base_url = "https://api.deepl.com"
    hosts = {"FREE": "https://api-free.deepl.com"}
    meta = {
        "name": "deepl_translate",
        "description": "DeepL translates text into a target language using the DeepL translation service.",
        "parameters": {
            "query": {"type": "string", "description": "The text to translate.", "default": "{sys.query}",
                      "required": True}
        },
    }
    defaults = {"auth_key": "xxx", "source_lang": "ZH", "target_lang": "EN-GB"}
    choices = {"source_lang": SOURCE_LANGS, "target_lang": TARGET_LANGS}

    def thoughts(self, ctx: NodeContext) -> str:
        return f"Translating into {self.params.target_lang}: {self.shown(ctx, 'query')}"

    def auth_key(self, ctx: NodeContext) -> str:
        key = str(self.params.given("auth_key") or "").strip()
        if key and key != "xxx":
            return key
        key = os.environ.get("DEEPL_API_KEY", "").strip()
        if not key:
            raise FieldError(ctx.component_id, "params.auth_key",
                             "no DeepL key: set it in the component's auth_key or in DEEPL_API_KEY")
        return key

    async def invoke(self, ctx: NodeContext, args: dict[str, Any]) -> str:
        text = str(self.option(args, "query") or "")
        if not text:
            return ""
        key = self.auth_key(ctx)
        url = self.endpoint("/v2/translate", host="FREE" if key.endswith(":fx") else "")
        body = {"text": [text], "source_lang": self.option(args, "source_lang"),
                "target_lang": self.option(args, "target_lang")}
        data = await self.request_json(ctx, "POST", url, json=body, headers={"Authorization": f"DeepL-Auth-Key {key}"})
        try:
            translated = str(data["translations"][0]["text"])
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{ctx.component_id}: DeepL's answer has no translation: {str(data)[:200]}") from None
        ctx.set_output("formalized_content", translated)
        return translated
