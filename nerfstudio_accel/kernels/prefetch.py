"""A software prefetch for numba kernels: ``prefetch_row(table, row)`` asks the CPU to bring the cache line of
``table[row, 0]`` in and returns at once (LLVM's ``llvm.prefetch``, a read into all cache levels).

A kernel that knows the rows its next point will read issues them before its current point's arithmetic, so the
memory latency of those random reads overlaps that arithmetic instead of stalling after it: an ordinary load
cannot run that far ahead, as the reorder buffer fills with the arithmetic first. A prefetch never faults, so a
row past the table's end (which the kernels never ask for) would only waste the hint.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ, _KEEP_IN_ALL_CACHES, _DATA = 0, 3, 1
"""``llvm.prefetch``'s arguments: a read (not a write), locality 3 (keep in every cache level), data (not code)."""


@intrinsic
def prefetch_row(typingctx, table, row):
    """Prefetch the cache line holding ``table[row, 0]`` of a 2-D array (no bounds check, no result)."""
    if not (isinstance(table, types.Array) and table.ndim == 2 and isinstance(row, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        address = cgutils.get_item_pointer(
            context, builder, array_type, array, [index, context.get_constant(types.intp, 0)]
        )
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(
            function,
            [
                builder.bitcast(address, byte_pointer),
                ir.Constant(i32, _READ),
                ir.Constant(i32, _KEEP_IN_ALL_CACHES),
                ir.Constant(i32, _DATA),
            ],
        )
        return context.get_dummy_value()

    return types.void(table, row), codegen
