"""The collector writes the dump names that stack-viewer reads: one module owns them."""

from diag.collector import events
from diag.common import dumpnames
from diag.pb import collector_pb2 as pb
from viewer import discover, load


def test_every_collector_dump_name_is_read_back_by_the_viewer_as_the_same_rank_and_dumper():
    assert set(events.FORMAT_TAGS) == {v.number for v in pb.StackDump.Format.DESCRIPTOR.values
                                       if v.number}   # every format the proto can send
    for fmt, tag in events.FORMAT_TAGS.items():
        name = events.dump_filename(3, 1024, fmt)
        match = discover.NAME.match(name)
        assert match and match.groups()[:3] == ("00003", "01024", tag), name
    native = {dumpnames.GDB, dumpnames.EU_STACK, dumpnames.PYSPY}
    assert set(load._NATIVE_ORDER) == native and native < set(events.FORMAT_TAGS.values())
    for doc in (dumpnames.HANG_JSON, dumpnames.SLOW_JSON, dumpnames.TIMELINE_JSON, dumpnames.SUMMARY_TXT):
        assert doc in discover._SKIP_NAMES, doc     # never read as a stack dump
