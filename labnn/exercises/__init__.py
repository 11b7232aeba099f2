"""Exercise checkers for the notebooks: each compares a learner's function with the
package's reference on random inputs and explains exactly what differs.

One sub-package per notebook, named after it, exports that notebook's checkers
(`from labnn.exercises.transformer_xl import check_segment_mask`): `self_attention` (01),
`transformer_xl` (02), `feedback_transformer` (03), `kv_sharing_stack` (04) and
`three_memories` (05). Beside them: `grading`, the machinery every checker shares, and
`claims`, the check of a sentence a notebook says about its own run."""
