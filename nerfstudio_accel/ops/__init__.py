"""The compiled ops, each one public function that picks its implementation for a resolved backend name.

``backend`` is ``nerfacc`` (nerfacc's CUDA ops, CUDA tensors), ``kernel`` (this package's fused kernels: numba
for CPU tensors, Triton for CUDA ones) or ``torch`` (the pure-PyTorch twins of :mod:`._torch_impl`, the reference);
the hash encoding's also ``tcnn``. An op whose backend has no implementation of it runs its torch twin. Which
backend a run uses is resolved once, into config.yml (:mod:`.backends`); callers pass it on and never branch on it.
"""
