"""Bring history in, take memory out: imports of ChatGPT and Claude exports, markdown vaults and this
project's own transcripts and exports, and the export of an agent's memory as one zip (docs/import-export.md).

    run.py           one import or export for admin.import / admin.export: picks the reader, syncs the index
    importer.py      a vendor's export into a SessionStore: streamed batches, idempotent, resumable, limits
    jsonarray.py     the elements of one huge JSON array, one at a time, in bounded memory
    reading.py       finding conversations.json: a zip, the file, or an unzipped folder
    conversation.py  a vendor's conversation as turns with their original times; session keys; BadExport
    chatgpt.py       ChatGPT's `mapping` tree along `current_node`, parts rendered as text
    claude.py        Claude's `chat_messages`, the branch that ends last
    transcripts.py   `jsonl`: transcript files, folders of them, a Jarvis export (sessions, keyed, notes)
    notes.py         markdown into the workspace: a vault under memory/<folder>/, never over an edit
    archive.py       `jarvis export`: the zip (sessions, keyed.jsonl, notes, manifest), readable without Jarvis

A feature module: it reaches storage only through the store Protocols (storage/base.py), so both engines
import and export alike; the methods (methods/admin.py) and the CLI (cli/portability.py) are its doors.
"""
