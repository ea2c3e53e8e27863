"""PTX machine-code edits: the ``machine_code`` gene group's language and its application.

* :mod:`.edits` -- the edit grammar (``kind:address=value`` strings), their canonical form and the
  alphabet the gene draws from;
* :mod:`.parse` -- PTX text as functions, segments and instructions (what each reads and writes);
* :mod:`.dataflow` -- which global loads are provably read-only, which instructions may swap;
* :mod:`.qualifiers` -- legal cache operators, eviction priorities and prefetch sizes of ld/st;
* :mod:`.apply` -- an edit list applied to a PTX text, with a report of what each edit did;
* :mod:`.carry` -- the edits carried in a kernel's source (a comment line the compilers ignore);
* :mod:`.ptxas` -- finding and running ptxas; :mod:`.nvrtc` -- CUDA C's path (NVRTC -> PTX -> edits
  -> ptxas); :mod:`.triton_hook` -- the edits inside Triton's compile.

Nothing here needs a GPU. See docs/machine-code.md.
"""
