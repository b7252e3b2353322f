"""The notes' tables on PostgreSQL (storage/postgres/notes.py), as db.py's MIGRATIONS apply them in order:

notes            (agent_id, path) → the text now, its SHA-256, version, when, the door, who
note_versions    (agent_id, path, version) → each version kept (memory.versions' limits)
note_tombstones  (agent_id, path) → the version deleted, when
"""

NOTES_MIGRATION = "0014_notes"  # its time of applying is part of a database's identity (notes.py)

NOTES_SQL = """
        CREATE TABLE notes (
            agent_id text NOT NULL,
            path text NOT NULL,
            content text NOT NULL,
            hash text NOT NULL,
            version integer NOT NULL,
            at text NOT NULL,
            by_door text NOT NULL,
            principal text,
            PRIMARY KEY (agent_id, path)
        );
        CREATE TABLE note_versions (
            agent_id text NOT NULL,
            path text NOT NULL,
            version integer NOT NULL,
            at text NOT NULL,
            by_door text NOT NULL,
            principal text,
            content text NOT NULL,
            PRIMARY KEY (agent_id, path, version)
        );
    """

# A note's deletion, kept: a gateway removes its mirror of a note the record lacks only when the record
# says it deleted that note at or after the version mirrored — a new database, or one restored from a
# backup, lacks notes it never deleted, and takes the files in.
TOMBSTONES_SQL = """
        CREATE TABLE note_tombstones (
            agent_id text NOT NULL,
            path text NOT NULL,
            version integer NOT NULL,
            at text NOT NULL,
            PRIMARY KEY (agent_id, path)
        );
    """

# The deletions made before 0016, when none was kept: a note whose versions stay but whose row is gone was
# deleted at its last version (every write adds its version; pruning keeps the newest). Kept as such, a
# gateway that mirrored it and had not yet reconciled removes its file instead of taking it back in. (One
# whose versions were all pruned, or one a gateway of the old version deletes after this ran, is not
# known: upgrade every gateway on a database together — docs/scaling.md.)
OLD_DELETIONS_SQL = """
        INSERT INTO note_tombstones (agent_id, path, version, at)
        SELECT v.agent_id, v.path, max(v.version), max(v.at) FROM note_versions v
        WHERE NOT EXISTS (SELECT 1 FROM notes n WHERE n.agent_id = v.agent_id AND n.path = v.path)
        GROUP BY v.agent_id, v.path
        ON CONFLICT (agent_id, path) DO NOTHING;
    """
