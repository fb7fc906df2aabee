"""The OpenAPI 3.1 document of the gateway's HTTP surface, made from the routes' own contracts.

`spec.build(app)` walks the app's router, so a route another module adds is in the document as soon as it
is registered; routes that declare a `Contract` (gateway/contract.py) get their request and response
schemas from the same pydantic models their handlers validate with. `routes.add_routes(app)` serves the
document at /openapi.json and a browsable page at /docs (Swagger UI from the swagger-ui-py package, no
build step and no network at run time).
"""
