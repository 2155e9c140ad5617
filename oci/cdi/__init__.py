"""CDI (Container Device Interface): edits, apply, qualified names, spec models, registry."""
