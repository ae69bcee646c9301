"""A cluster of servers behind one router: the routers of SGLang's gateway, Dynamo and llm-d."""
