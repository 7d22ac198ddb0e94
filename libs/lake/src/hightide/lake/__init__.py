"""hightide.lake: the Parquet lake of archived events. Room: libs/lake (over runtime, under the services).

- `schema`: the one table's explicit Arrow schema (`SCHEMA`), envelopes to rows and back.
- `layout`: the directory's names (`date=/hour=/events-F-L.IofN.parquet`, `quarantine/`, `.lock`) and `scan_lake`.
- `lock`: one writer per lake (`LakeLock`, `LakeInUse`).
- `writer`: `LakeWriter`, durable and exactly once per stream sequence.
- `reader`: `read_envelopes`, `read_table`, `count_events`, `file_formats`.
- `archiver`: the durable consumer loop (`Archiver`) the archiver service runs.
- `export`: `export_once`, the one-shot archive behind `hightide events export`.
"""

from hightide.lake.archiver import ARCHIVER_CONSUMER, Archiver, archiver_lag
from hightide.lake.export import ExportFailed, ExportSummary, export_once
from hightide.lake.layout import LakeError, LakeScan, NotOurFile, SequenceRanges, scan_lake
from hightide.lake.lock import LakeInUse, LakeLock
from hightide.lake.metrics import ArchiverMetrics
from hightide.lake.reader import count_events, file_formats, read_envelopes, read_table
from hightide.lake.schema import SCHEMA
from hightide.lake.writer import LakeWriter, WriteResult

__all__ = [
    "ARCHIVER_CONSUMER",
    "SCHEMA",
    "Archiver",
    "ArchiverMetrics",
    "ExportFailed",
    "ExportSummary",
    "LakeError",
    "LakeInUse",
    "LakeLock",
    "LakeScan",
    "LakeWriter",
    "NotOurFile",
    "SequenceRanges",
    "WriteResult",
    "archiver_lag",
    "count_events",
    "export_once",
    "file_formats",
    "read_envelopes",
    "read_table",
    "scan_lake",
]
