"""Pieces of the OpenAPI document the routes share."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from api.rest import schemas

REF_TEMPLATE = "#/components/schemas/{model}"
# Request bodies are read by the routes themselves (for TARSy's messages and limits);
# their models are added to the document's components here.
REQUEST_MODELS: dict[str, type[BaseModel]] = {}

ERRORS: dict[int, Any] = {400: schemas.Error, 401: schemas.Error, 403: schemas.Error}
NOT_FOUND: dict[int, Any] = {401: schemas.Error, 404: schemas.Error}


def request_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    REQUEST_MODELS[model.__name__] = model
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {"schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}
            },
        }
    }


def add_request_models(document: dict[str, Any]) -> dict[str, Any]:
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, model in REQUEST_MODELS.items():
        schema = model.model_json_schema(ref_template=REF_TEMPLATE)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    return document
