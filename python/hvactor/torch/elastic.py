"""hvactor.torch.elastic: placeholder until the elastic loop is bound."""
