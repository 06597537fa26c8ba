"""The supervisor's records: job and task states, attempts and failures (:mod:`.states`), the lives
of a resumable run (:mod:`.lives`), recoveries (:mod:`.recovery`), and the immutable snapshot
everything outside the supervisor reads (:mod:`.snapshot`)."""
