"""The federated protocol: participants, the coordinator, and the messages between them."""
