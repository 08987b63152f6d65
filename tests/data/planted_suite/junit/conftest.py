"""A suite that writes its own JUnit report: after pytest has written the XML, the file named
by PLANTED_JUNIT replaces it ('@link TARGET': a symlink; '@fifo': a FIFO). Does nothing unless
PLANTED_JUNIT is set."""

import os


def pytest_unconfigure(config):
    case, xml = os.environ.get("PLANTED_JUNIT"), getattr(config.option, "xmlpath", None)
    if not case or not xml:
        return
    with open(case, "rb") as fh:
        data = fh.read()
    if os.path.lexists(xml):
        os.unlink(xml)
    if data.startswith(b"@link "):
        os.symlink(data[6:].decode().strip(), xml)
    elif data.startswith(b"@fifo"):
        os.mkfifo(xml)
    else:
        with open(xml, "wb") as fh:
            fh.write(data)
