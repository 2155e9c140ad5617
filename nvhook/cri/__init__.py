"""Kubelet's side of the CRI: a v1 ``RuntimeService`` client (:mod:`.client`) on the checked-in
messages of a subset of the API (:mod:`.v1`), for ``nvhook demo --kubernetes`` and the tests."""
