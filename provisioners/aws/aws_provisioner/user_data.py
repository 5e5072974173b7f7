"""The cloud-init user data of a launch: the autoscaler's SSH key, merged with the pool's own."""

from __future__ import annotations

import email
import email.charset
import gzip
import json
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

from .errors import permanent

USER_DATA_LIMIT = 16 * 1024  # EC2's limit on user data, before base64


def part_type(text: str) -> str:
    """The MIME type cloud-init gives a part starting like this (its own rules, abridged)."""
    starts = [
        ("#cloud-config-archive", "text/cloud-config-archive"),
        ("#cloud-config", "text/cloud-config"),
        ("#cloud-boothook", "text/cloud-boothook"),
        ("#include-once", "text/x-include-once-url"),
        ("#include", "text/x-include-url"),
        ("#part-handler", "text/part-handler"),
        ("## template: jinja", "text/jinja2"),
        ("#!", "text/x-shellscript"),
    ]
    for prefix, mime in starts:
        if text.startswith(prefix):
            return mime
    return "text/x-shellscript"  # most user data without a marker is meant as a script


def text_part(text: str, mime: str) -> MIMEText:
    """A MIME part holding text as it is (8bit, not base64: smaller, and readable on the
    instance)."""
    charset = email.charset.Charset("utf-8")
    charset.body_encoding = None
    return MIMEText(text, mime.split("/", 1)[1], charset)


def build_user_data(public_key: str, user_data: str | None) -> bytes:
    """Cloud-init user data authorising public_key for the image's default user, combined with
    the pool's own user_data, if any, as a multipart MIME document (ours last, merged by append,
    so keys the pool's cloud-config lists are kept). Gzipped when it would pass EC2's 16 KiB."""
    ours = "#cloud-config\n" + "ssh_authorized_keys:\n  - " + json.dumps(public_key) + "\n"
    if not user_data:
        document = ours.encode()
    else:
        outer = MIMEMultipart()
        if user_data.lstrip().lower().startswith(("content-type: multipart/", "mime-version:")):
            # Already a MIME document: add our part to its parts.
            given = email.message_from_string(user_data.lstrip())
            parts = given.get_payload() if given.is_multipart() else [given]
            for part in parts:
                outer.attach(part)
        else:
            outer.attach(text_part(user_data, part_type(user_data)))
        mine = text_part(ours, "text/cloud-config")
        mine.add_header("Merge-Type", "list(append)+dict(recurse_array,no_replace)+str()")
        outer.attach(mine)
        document = outer.as_bytes()
    if len(document) > USER_DATA_LIMIT:
        document = gzip.compress(document, mtime=0)
        if len(document) > USER_DATA_LIMIT:
            permanent(f"user data is {len(document)} bytes even gzipped; EC2 takes at most {USER_DATA_LIMIT}")
    return document
