"""``nvhook dra-plugin``: a Kubernetes DRA driver (``gpu.nvidia.com``) for GPUs, MIG devices
and IMEX channels (docs/dra.md), and with ``--vendor`` for AMD, Intel or Ascend devices under
their own DRA drivers' names (``gpu.amd.com``, ``gpu.intel.com``, ``npu.huawei.com``).

- :mod:`.inventory`: the node's devices (NVML and the driver's ``/proc``, from nvhook's host
  roots) as ``resource.k8s.io/v1`` devices and ResourceSlices;
- :mod:`.kubeapi`: the few API calls the driver makes (ResourceSlices, ResourceClaims);
- :mod:`.state`: the checkpoint of prepared claims, written atomically;
- :mod:`.prepare`: ``NodePrepareResources``/``NodeUnprepareResources`` as value-level logic
  (claims checked, one transient CDI spec per claim);
- :mod:`.server`: the gRPC services (plugin-watcher registration, ``v1``/``v1beta1``
  ``DRAPlugin``, ``dra-health``) and kubelet's side of them for the stand-ins;
- :mod:`.vendors`: the other vendors' devices (:mod:`nvhook.vendors`) as their own DRA
  drivers publish them, and their claims' CDI edits;
- :mod:`.plugin`: the daemon loop (publish, serve, register, watch, stop).
"""
