"""The methods: one package per method family (the ADMM methods, the one-matrix moments method, the staged private statistics) and
:mod:`.pooled`, and the registry that lists them (:mod:`.registry`: every fact about a method in one
:class:`~bnsl_cli.federated.method_spec.MethodSpec` entry). This package imports nothing, so a method's
coordinator side can be imported without its site side (the registry binds both).
"""
