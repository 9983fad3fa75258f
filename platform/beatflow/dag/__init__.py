"""The DAG layer: model (pure), authoring API, loader, compiler."""
