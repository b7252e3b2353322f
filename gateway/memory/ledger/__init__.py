"""The ledger: what Jarvis believes about the person now, kept as memory is indexed.

    lexicon.py   the subjects of a life (home, work, partner, pets, codes, …): cue words, descriptions
    extract.py   the offline extractor: statements in what the person said, by rules and the lexicon
    values.py    a statement's value: the span that names it (a place, a name, a job at an employer, a code)
    facts.py     statements as facts: each subject's values with their validity (from, until)
    recall.py    a question's subject and time → the statement it asks about
    placement.py where it goes among the hits: first, superseded ones after it, ties to who states
    profile.py   memory.profile's page: the current facts, bounded (limit, cursor, subject, history)
    record.py    the pipeline's step: a file's statements written to the engine's LedgerStore

The statements are derived data, like the chunks: the engine keeps them beside the index (memory/ports.py's
LedgerStore), a sync rewrites a file's whenever it indexes the file, and a rebuild makes them anew.
"""

# Part of the index signature (memory/signature.py): a new extractor rebuilds the ledger with the index.
LEDGER_VERSION = 6  # 6: forms generalised by class (tests/data/ledger_paraphrases.json), birthday; 2: values are spans (values.py), wider forms; 3: forms without the cue (brands, which.py); 4: round two (offers taken, actions, reactions, replacements); 5: cues that misfired on ordinary text narrowed (locks, endings, other half, freelance)
