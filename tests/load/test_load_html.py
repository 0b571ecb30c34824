"""HTML files and URLs: main text only, headings as sections, and the private-address guard."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from citeline.errors import LoadError, UnsupportedTypeError
from citeline.load import load
from citeline.load.html import load_url

ARTICLE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Cholesterol explained</title>
<style>body { color: red } .stylerule { }</style>
<script>var tracking = "SCRIPTCONTENT";</script></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/navlink">Navigation link</a></li></ul></nav>
<main><article>
<h1>Understanding LDL-C</h1>
<p>Low-density lipoprotein cholesterol, written LDL-C, is measured in a routine blood test and
reported in millimoles per litre in most of Europe.</p>
<h2>Why it matters</h2>
<p>High levels are associated with a higher risk of heart disease over many years, which is why
guidelines recommend regular testing for adults over forty.</p>
</article></main>
<footer>Copyright 2024 Example Health. All rights reserved.</footer>
</body></html>
"""


def test_html_file_keeps_main_text_and_headings(tmp_path: Path) -> None:
    path = tmp_path / "ldl.html"
    path.write_text(ARTICLE, encoding="utf-8")
    source = load(path)
    page = next(source.pages)
    assert source.content_type == "text/html"
    assert source.title == "Cholesterol explained"
    assert "routine blood test" in page.text
    for boilerplate in ("SCRIPTCONTENT", "stylerule", "Navigation link"):
        assert boilerplate not in page.text
    assert [section.heading for section in page.sections] == ["Understanding LDL-C", "Why it matters"]
    assert page.text[page.sections[1].start :].startswith("## Why it matters")


def test_a_short_page_keeps_its_headings_and_table_and_drops_its_menu(tmp_path: Path) -> None:
    path = tmp_path / "specs.html"
    path.write_text(
        "<html><head><title>Pump specs</title></head><body><nav>Home Products</nav><main>"
        "<h1>Pump specs</h1><p>The XR-200 delivers 40 litres per minute at 6 bar.</p>"
        "<h2>Flow</h2><table><tr><th>Model</th><th>Flow</th></tr><tr><td>XR-200</td><td>40</td></tr></table>"
        "</main><footer>Copyright</footer></body></html>"
    )
    [page] = load(path).pages
    assert [section.heading for section in page.sections] == ["Pump specs", "Flow"]
    assert "| XR-200 | 40 |" in page.text
    assert "Home" not in page.text and "Copyright" not in page.text


def test_html_without_main_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shell.htm"
    path.write_text("<html><head><title>App</title><script>render()</script></head><body></body></html>")
    with pytest.raises(LoadError, match="no main text"):
        load(path)


@pytest.mark.parametrize(
    "body",
    [
        '<nav><a href="/">Home</a> <a href="/about">About</a></nav><footer>(c) 2026 Example Ltd</footer>',
        "<nav>Home</nav>",
        "<header><a href='/'>Example</a></header><aside>Related: pumps</aside>",
    ],
)
def test_a_page_of_navigation_alone_is_refused_not_indexed(
    tmp_path: Path, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "nav.html"
    path.write_text(f"<html><head><title>Site</title></head><body>{body}</body></html>")
    with pytest.raises(LoadError, match=r"nav\.html.*no main text"):
        load(path)
    assert not [r for r in caplog.records if r.name.startswith("trafilatura")]


def test_a_short_page_with_its_text_beside_the_navigation_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "short.html"
    path.write_text(
        "<html><body><nav><a href='/'>Home</a></nav>"
        "<p>Prime the pump by filling the casing with water before starting it.</p></body></html>"
    )
    [page] = load(path).pages
    assert "Prime the pump" in page.text


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/",
        "http://127.0.0.1:8080/admin",
        "http://2130706433/",  # 127.0.0.1 written as one number
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "https://172.16.5.4/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://0.0.0.0/",
        "http://100.64.0.1/",
    ],
)
def test_private_and_special_addresses_are_refused(url: str) -> None:
    with pytest.raises(LoadError, match="refusing to fetch") as caught:
        load(url)
    assert caught.value.source == url
    # It names the way out for every shell: the setting (refresh, reingest, the API), the CLI option, Python.
    for way_out in ("CITELINE_URL_ALLOW_PRIVATE=true", "--allow-private-urls", "allow_private=True"):
        assert way_out in caught.value.reason


@pytest.mark.parametrize("url", ["ftp://example.com/file.html", "file:///etc/passwd", "gopher://x/"])
def test_only_http_and_https_urls_are_accepted(url: str) -> None:
    with pytest.raises(UnsupportedTypeError, match="only http and https"):
        load(url)


class _Site(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []  # noqa: RUF012 -- one server per test, reset by the fixture

    def do_GET(self) -> None:
        self.requests.append(self.path)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/article")
            self.end_headers()
            return
        routes = {
            "/article": ("text/html; charset=utf-8", ARTICLE.encode()),
            "/data.json": ("application/json", b'{"a": 1}'),
            "/huge": ("text/html", b"<p>" + b"word " * 50_000 + b"</p>"),
            "/huge-unannounced": ("text/html", b"<p>" + b"word " * 50_000 + b"</p>"),
            "/empty": ("text/html; charset=utf-8", b""),
            "/blank": ("text/html", b"  \r\n  "),
        }
        if self.path not in routes:
            self.send_error(404, "Not Found")
            return
        content_type, body = routes[self.path]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if self.path != "/huge-unannounced":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


@pytest.fixture
def site() -> Iterator[str]:
    _Site.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_local_server_is_refused_without_being_contacted(site: str) -> None:
    with pytest.raises(LoadError, match=r"127\.0\.0\.1 is a loopback address"):
        load(f"{site}/article")
    assert _Site.requests == []


def test_fetch_with_allow_private(site: str) -> None:
    source = load(f"{site}/article", allow_private=True)
    page = next(source.pages)
    assert source.content_type == "text/html"
    assert source.title == "Cholesterol explained"
    assert source.metadata["url"] == f"{site}/article"
    assert "routine blood test" in page.text
    assert "Navigation link" not in page.text
    assert [section.heading for section in page.sections] == ["Understanding LDL-C", "Why it matters"]


def test_redirects_are_followed(site: str) -> None:
    source = load(f"{site}/moved", allow_private=True)
    assert source.metadata["url"] == f"{site}/article"
    assert _Site.requests == ["/moved", "/article"]


def test_http_errors_name_the_status(site: str) -> None:
    with pytest.raises(LoadError, match="HTTP error 404"):
        load(f"{site}/nothing-here", allow_private=True)


def test_non_html_responses_are_refused(site: str) -> None:
    with pytest.raises(LoadError, match=r"not an HTML page \(the server sent application/json\)"):
        load(f"{site}/data.json", allow_private=True)


@pytest.mark.parametrize("path", ["/huge", "/huge-unannounced"])
def test_responses_over_the_size_cap_are_refused(site: str, path: str) -> None:
    with pytest.raises(LoadError, match="page too large"):
        load_url(f"{site}{path}", allow_private=True, max_bytes=10_000)


def test_unreachable_port_fails_cleanly(site: str) -> None:
    with pytest.raises(LoadError, match="cannot fetch"):
        load_url("http://127.0.0.1:9/", allow_private=True, timeout=2)


@pytest.mark.parametrize("separator", [" | ", " · ", " » "])
def test_the_site_name_in_a_title_is_left_out(tmp_path: Path, separator: str) -> None:
    # "Valve care | Example Plant" names the site on every page of it; the document is "Valve care".
    path = tmp_path / "valves.html"
    body = "<main><h1>Valve care</h1><p>The relief valve opens at 6 bar and is tested every month.</p></main>"
    for title in (f"Valve care{separator}Example Plant", f"Example Plant{separator}Valve care"):
        path.write_text(f"<html><head><title>{title}</title></head><body>{body}</body></html>")
        assert load(path).title == "Valve care"


def test_a_title_part_is_left_out_after_a_dash_or_colon_only_when_it_is_the_site_name(tmp_path: Path) -> None:
    # A dash or a colon also opens a subtitle ("Relief valves - a primer"), which is the title's own.
    body = (
        "<main><h1>Relief valves</h1><p>The relief valve opens at 6 bar and is tested every month.</p></main>"
    )
    path = tmp_path / "valves.html"
    titles = ("Relief valves - a primer", "Relief valves: a primer", "Relief valves \u2013 Example Plant")
    for title in titles:
        path.write_text(f"<html><head><title>{title}</title></head><body>{body}</body></html>")
        assert load(path).title == title
    site = '<meta property="og:site_name" content="Example Plant">'
    for title in ("Relief valves \u2013 Example Plant", "Example Plant: Relief valves"):
        path.write_text(f"<html><head><title>{title}</title>{site}</head><body>{body}</body></html>")
        assert load(path).title == "Relief valves"


def test_a_copyright_year_is_not_the_page_date(tmp_path: Path) -> None:
    # The footer's "Copyright 2024" came back as the date 2024-01-01, a day the page never names.
    path = tmp_path / "ldl.html"
    path.write_text(ARTICLE, encoding="utf-8")
    assert "date" not in load(path).metadata
    dated = ARTICLE.replace("<h1>", '<p><time datetime="2023-03-14">14 March 2023</time></p><h1>')
    path.write_text(dated, encoding="utf-8")
    assert load(path).metadata["date"] == "2023-03-14"
    new_year = ARTICLE.replace("<h1>", '<p><time datetime="2023-01-01">1 January 2023</time></p><h1>')
    path.write_text(new_year, encoding="utf-8")
    assert load(path).metadata["date"] == "2023-01-01"


def test_a_line_break_inside_a_paragraph_does_not_end_it(tmp_path: Path) -> None:
    # trafilatura renders each <br> as a paragraph break, so "daily<br>with food" was two paragraphs: the
    # splitter's first choice of cut fell inside the sentence. Two <br> in a row still end a paragraph.
    path = tmp_path / "dosing.html"
    path.write_text(
        "<html><head><title>Dosing</title></head><body><main><h1>Dosing</h1>"
        "<p>Adults take 75 mg of aspirin daily<br>with food, unless the clinician says otherwise.</p>"
        "<p>Old pages part paragraphs with line breaks.<br><br>Like this second paragraph.</p>"
        "</main></body></html>"
    )
    [page] = load(path).pages
    assert page.text == (
        "# Dosing\n\nAdults take 75 mg of aspirin daily with food, unless the clinician says otherwise.\n\n"
        "Old pages part paragraphs with line breaks.\n\nLike this second paragraph."
    )


def _plain_page(rows: str, items: str) -> str:
    """A page whose text sits in plain <div>s, with no <main>, <article> or container class trafilatura
    knows, as many hand-written and exported pages are."""
    return (
        "<html><head><title>Pump maintenance</title></head><body>"
        '<div class="menu"><a href="/">Home</a> | <a href="/docs">Docs</a></div>'
        '<div class="wrapper"><h1>Pump maintenance</h1><p>The pump is inspected every 250 hours.</p>'
        f"<h2>Checklist</h2><ul>{items}</ul>"
        f"<h2>Torque values</h2><table><tr><th>Bolt</th><th>Torque</th></tr>{rows}</table>"
        "<p>Torque the bolts in a cross pattern.</p></div>"
        '<div id="bottom">Last edited by jdoe. <a href="/privacy">Privacy policy</a></div>'
        "</body></html>"
    )


_ITEMS = "<li>Check the inlet strainer for debris.</li><li>Check the shaft seal for weeping oil.</li>"


@pytest.mark.parametrize(
    "html",
    [
        # trafilatura lost the headings and the list of this one...
        _plain_page("<tr><td>M8</td><td>25 Nm</td></tr>", _ITEMS),
        # ... and the table of this one, with a third item in the list.
        _plain_page("<tr><td>M8</td><td>25 Nm</td></tr>", _ITEMS + "<li>Record the discharge pressure.</li>"),
    ],
    ids=["headings-and-list", "table"],
)
def test_a_page_without_a_main_or_article_element_keeps_its_headings_lists_and_tables(
    tmp_path: Path, html: str
) -> None:
    # trafilatura finds the main text inside <main>, <article> or a container whose class it knows; on
    # a page without one it fell back to picking up loose paragraphs or to other extractors, and the
    # headings (so no sections), the list items or the table were lost, depending on the page.
    path = tmp_path / "pump.html"
    path.write_text(html, encoding="utf-8")
    [page] = load(path).pages
    headings = [section.heading for section in page.sections]
    assert headings == ["Pump maintenance", "Checklist", "Torque values"]
    assert "- Check the inlet strainer for debris.\n- Check the shaft seal for weeping oil." in page.text
    assert "| M8 | 25 Nm |" in page.text
    assert page.text.endswith("Torque the bolts in a cross pattern.")
    for boilerplate in ("Home", "Docs", "Privacy policy", "Last edited"):
        assert boilerplate not in page.text


def test_a_page_with_its_text_straight_in_the_body_keeps_its_headings(tmp_path: Path) -> None:
    # As a page saved from a word processor is: no container at all.
    path = tmp_path / "notes.html"
    path.write_text(
        "<html><head><title>Pump notes</title></head><body><h1>Pump care</h1>"
        "<p>The pump is inspected every 250 hours, and the seals are replaced every year.</p>"
        "<h2>Seals</h2><p>Use only Viton seals rated for high temperatures.</p></body></html>"
    )
    [page] = load(path).pages
    assert page.text == (
        "# Pump care\n\nThe pump is inspected every 250 hours, and the seals are replaced every year.\n\n"
        "## Seals\n\nUse only Viton seals rated for high temperatures."
    )
    assert [section.heading for section in page.sections] == ["Pump care", "Seals"]


@pytest.mark.parametrize("path", ["/empty", "/blank"])
def test_an_empty_page_is_said_to_be_empty(site: str, path: str) -> None:
    # A server answering 200 with no content (a page being rebuilt, a broken proxy) was reported as
    # "not HTML (no markup could be parsed)", which sends the user looking at the page's markup.
    with pytest.raises(LoadError) as caught:
        load(f"{site}{path}", allow_private=True)
    assert caught.value.reason == "empty page (the server sent no content)"


LAYOUT_PAGE = """<html><head><title>Pump manual</title></head><body>
<table width="100%"><tr><td width="20%"><a href="/">Home</a><br><a href="/pumps">Pumps</a><br>
<a href="/valves">Valves</a></td>
<td><h1>Pump manual</h1><p>The pump is inspected every 250 hours. Check the inlet strainer for debris.</p>
<h2>Torques</h2><table><tr><th>Bolt</th><th>Torque</th></tr><tr><td>M8</td><td>25 Nm</td></tr></table>
<p>Replace the shaft seal when you see weeping oil around the shaft.</p></td></tr></table>
</body></html>"""


def test_a_page_laid_out_in_a_table_is_read_as_text_not_as_one_table_row(tmp_path: Path) -> None:
    # Older sites, HTML exports and e-mails lay the page out in a table: the whole page came out as one
    # Markdown table row ("| Home Pumps | Pump manual The pump is ... |"), menu included, with no
    # headings and no paragraphs. A table whose cells hold headings, paragraphs or tables is layout.
    path = tmp_path / "manual.html"
    path.write_text(LAYOUT_PAGE, encoding="utf-8")
    [page] = load(path).pages
    assert [section.heading for section in page.sections] == ["Pump manual", "Torques"]
    assert "# Pump manual\n\nThe pump is inspected every 250 hours." in page.text
    assert "| M8 | 25 Nm |" in page.text  # a table of data in it stays a table
    assert page.text.endswith("Replace the shaft seal when you see weeping oil around the shaft.")


def test_a_table_of_data_whose_cells_hold_paragraphs_stays_a_table(tmp_path: Path) -> None:
    # As a wiki writes one: every cell's text in a <p>, some in a <div> around them.
    path = tmp_path / "torques.html"
    path.write_text(
        "<html><head><title>Torques</title></head><body><main><h1>Torques</h1><p>For pump housings.</p>"
        "<table><tr><th><div><p>Bolt</p></div></th><th><p>Torque</p></th></tr>"
        "<tr><td><div><p>M8</p><p>flange</p></div></td><td><p>25 Nm</p></td></tr></table>"
        "</main></body></html>"
    )
    [page] = load(path).pages
    assert "| Bolt | Torque |\n|---|---|\n| M8 flange | 25 Nm |" in page.text
    # Nor is a table of many rows one of layout for a heading in a cell: unwrapped, its rows were lost.
    rows = "".join(f"<tr><td>AN{n}</td><td>Washer size {n}</td></tr>" for n in range(960, 964))
    path.write_text(
        "<html><head><title>Parts</title></head><body><main><h1>Parts</h1><p>For pump housings.</p>"
        f"<table><tr><th>Part</th><th>Note</th></tr>{rows}<tr><td>AN4</td><td><h4>Bolt</h4></td></tr>"
        "</table></main></body></html>"
    )
    [page] = load(path).pages
    assert "| AN960 | Washer size 960 |" in page.text and "| AN4 | Bolt |" in page.text


def test_a_list_inside_a_table_cell_is_kept(tmp_path: Path) -> None:
    # trafilatura drops a list that sits in a table cell: the row read "| M10 |  |", its values lost.
    path = tmp_path / "torques.html"
    path.write_text(
        "<html><head><title>Torques</title></head><body><main><h1>Torques</h1><p>For pump housings.</p>"
        "<table><tr><th>Bolt</th><th>Torque</th></tr>"
        "<tr><td>M10</td><td>Either:<ul><li>49 Nm dry</li><li>44 Nm <b>oiled</b></li></ul></td></tr>"
        "<tr><td>M12</td><td><ol><li>85 Nm</li></ol></td></tr></table></main></body></html>"
    )
    [page] = load(path).pages
    assert "| M10 | Either: 49 Nm dry; 44 Nm oiled |\n| M12 | 85 Nm |" in page.text


def test_a_spacer_row_does_not_hide_a_layout_table_and_a_heading_alone_in_a_cell_is_data(
    tmp_path: Path,
) -> None:
    # Four rows, one of them an empty spacer, read as one table row with no headings; a three-row table
    # of data whose header cell held an <h4> was unwrapped into loose lines, its pairs lost.
    layout = tmp_path / "layout.html"
    layout.write_text(
        "<html><head><title>Pump</title></head><body><table><tr><td><img src=logo.png alt=Logo></td></tr>"
        "<tr><td height=8></td></tr><tr><td><a href=/>Home</a></td><td><h1>Pump manual</h1><p>The pump is "
        "primed before its first start with clean water.</p><h2>Servicing</h2><p>Replace the seal every "
        "year and check the impeller.</p></td></tr><tr><td>Footer</td></tr></table></body></html>"
    )
    [page] = load(layout).pages
    assert "# Pump manual\n\nThe pump is primed" in page.text and "## Servicing" in page.text
    data = tmp_path / "data.html"
    data.write_text(
        "<html><head><title>Parts</title></head><body><main><h1>Parts</h1><p>Parts of the pump.</p><table>"
        "<tr><th><h4>Bolt</h4></th><th>Note</th></tr><tr><td>AN960</td><td>Washer size 960</td></tr>"
        "<tr><td>AN4</td><td>Bolt of 1/4 inch</td></tr></table></main></body></html>"
    )
    [page] = load(data).pages
    assert "| Bolt | Note |" in page.text and "| AN960 | Washer size 960 |" in page.text


def test_a_nested_list_in_a_table_cell_is_written_once_after_its_item(tmp_path: Path) -> None:
    # Each item's whole text ran its nested items together, and they came again on their own:
    # "Dry49 Nm52 Nm max; 49 Nm; 52 Nm max; Oiled 44 Nm".
    path = tmp_path / "torques.html"
    path.write_text(
        "<html><head><title>Torques</title></head><body><main><h1>Torques</h1><p>For pump housings.</p>"
        "<table><tr><th>Bolt</th><th>Torque</th></tr><tr><td>M10</td><td><ul>"
        "<li>Dry<ul><li>49 Nm</li><li>52 Nm max</li></ul></li><li>Oiled 44 Nm</li></ul></td></tr>"
        "</table></main></body></html>"
    )
    [page] = load(path).pages
    assert "| M10 | Dry: 49 Nm, 52 Nm max; Oiled 44 Nm |" in page.text


MENU_CELL = (
    '<td width="20%"><a href="/">Home</a><br><a href="/pumps">Pumps</a><br><a href="/valves">Valves</a></td>'
)
SEAL_ROWS = [
    ("Seal", "Material", "Limit"),
    ("Shaft seal", "Viton", "200 C"),
    ("Casing gasket", "EPDM", "150 C"),
]
SEAL_ROWS += [("Cover O-ring", "NBR", "100 C"), ("Drain plug washer", "Copper", "400 C")]


def _seals(rows: int) -> tuple[str, str]:
    """A table of data of ``rows`` rows, all ``<td>`` (its first row names the columns), and the
    Markdown table it is read as."""
    html = "".join(
        "<tr>" + "".join(f"<td>{value}</td>" for value in row) + "</tr>" for row in SEAL_ROWS[:rows]
    )
    lines = ["| " + " | ".join(row) + " |" for row in SEAL_ROWS[:rows]]
    return f"<table>{html}</table>", "\n".join([lines[0], "|---|---|---|", *lines[1:]])


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", re.sub(r"<[^>]*>", " ", text)))


SEALS_5, SEALS_5_READ = _seals(5)
SEALS_2, SEALS_2_READ = _seals(2)
BEFORE = "<p>Seals are replaced at every overhaul of the pump.</p>"
AFTER = "<p>Keep spare seals dry and out of the light.</p>"
FOOTER = "<td>Questions? Call the service desk on 0113 496 0000.</td>"
PRIMING = "The pump is primed with clean water before it is started. Open the vent until water runs out."


@pytest.mark.parametrize(
    ("main", "table"),
    [
        # The data table in the cell beside the menu, with a heading over it and without one.
        (
            f"<table width=100%><tr>{MENU_CELL}<td><h1>Seal guide</h1>{BEFORE}{SEALS_5}{AFTER}</td></tr>"
            "</table>",
            SEALS_5_READ,
        ),
        (f"<table width=100%><tr>{MENU_CELL}<td>{BEFORE}{SEALS_2}{AFTER}</td></tr></table>", SEALS_2_READ),
        # The cell's text and table each in a block of its own.
        (
            f"<table><tr>{MENU_CELL}<td><div>{BEFORE}</div><div>{SEALS_5}{AFTER}</div></td></tr></table>",
            SEALS_5_READ,
        ),
        # A layout table in a layout table: a logo row, the menu beside the page, a footer row.
        (
            f"<table width=100%><tr><td><img src=logo.png alt=Logo></td></tr><tr>{MENU_CELL}<td><table>"
            f"<tr><td><h1>Seal guide</h1>{BEFORE}</td></tr><tr><td>{SEALS_5}{AFTER}</td></tr></table>"
            f"</td></tr><tr>{FOOTER}</tr></table>",
            SEALS_5_READ,
        ),
    ],
    ids=["heading-5-rows", "2-rows", "blocks", "layout-in-layout"],
)
def test_a_layout_table_keeps_every_word_of_the_page_and_its_table_of_data(
    tmp_path: Path, main: str, table: str
) -> None:
    # A table inside a layout table was itself unwrapped into a <div> of loose rows, which trafilatura
    # wrote without a "|---|" row (no Markdown table) or read as one table with the page's text; and a
    # row holding the menu cell and the page's cell, a short block full of links for trafilatura, was
    # dropped with all it held: the text beside the table, or the footer, was lost.
    text = _seal_guide(tmp_path, main)
    # Every word the page shows reaches the loaded page, but the menu's, which trafilatura may drop.
    assert _words(main) - MENU_WORDS <= _words(text)
    assert f"{table}\n\nKeep spare seals dry and out of the light." in text


def _seal_guide(tmp_path: Path, body: str) -> str:
    """The text citeline loads from a page titled "Seal guide" whose body is ``body``."""
    path = tmp_path / "seals.html"
    path.write_text(
        f"<html><head><title>Seal guide</title></head><body>{body}</body></html>", encoding="utf-8"
    )
    [page] = load(path).pages
    return page.text


MENU_WORDS = {"Home", "Pumps", "Valves"}

PART_LINKS = "".join(
    f"<tr><td><a href=/parts/an{n}>AN{n}</a></td><td><a href=/drawings/an{n}>Drawing</a> | "
    f"<a href=/sheets/an{n}>Data sheet</a></td></tr>"
    for n in range(960, 966)
)
PART_LINKS_READ = "| AN960 | Drawing \\| Data sheet |\n|---|---|\n| AN961 | Drawing \\| Data sheet |"
SEE_ALSO = 'See also: <a href="/valve-manual">Valve manual</a>, <a href="/pump-manual">Pump manual</a>'


@pytest.mark.parametrize(
    ("main", "table"),
    [
        # The cell beside the menu holds a table of data and nothing else, or a heading over it.
        (f"<table width=100%><tr>{MENU_CELL}<td>{SEALS_5}</td></tr></table>", SEALS_5_READ),
        (
            f"<table width=100%><tr>{MENU_CELL}<td><h1>Seal guide</h1>{SEALS_5}</td></tr></table>",
            SEALS_5_READ,
        ),
        # A table of data whose cells are links to the parts' pages is the page's content.
        (
            f"<table width=100%><tr>{MENU_CELL}<td><table>{PART_LINKS}</table></td></tr></table>",
            PART_LINKS_READ,
        ),
        # Links under the page's text, in a cell of their own ("See also"), are its content too.
        (
            f"<table width=100%><tr>{MENU_CELL}<td><h1>Seal guide</h1>{SEALS_5}</td></tr>"
            f"<tr><td></td><td>{SEE_ALSO}</td></tr></table>",
            SEALS_5_READ,
        ),
    ],
    ids=["table-alone", "heading-and-table", "table-of-links", "see-also"],
)
def test_the_menu_of_a_layout_table_is_not_indexed_and_its_content_is(
    tmp_path: Path, main: str, table: str
) -> None:
    # With no paragraph beside the table of data, trafilatura's own extraction was the table alone, and
    # it preferred readability's, which kept the menu's cell: "Home Pumps Valves" was indexed with the
    # page. A cell of a layout table holding short links and nothing else is the site's navigation.
    text = _seal_guide(tmp_path, main)
    assert not MENU_WORDS & _words(text)
    assert _words(main) - MENU_WORDS <= _words(text)
    assert table in text


SEALS_TH = (
    "<table><tr><th>Kit</th><th>Price</th></tr><tr><td>XR-200 seal kit</td><td>45 EUR</td></tr>"
    "<tr><td>XR-300 seal kit</td><td>60 EUR</td></tr></table>"
)
SEALS_TH_READ = "| Kit | Price |\n|---|---|\n| XR-200 seal kit | 45 EUR |\n| XR-300 seal kit | 60 EUR |"
#: An HTML e-mail as its templates lay it out: a table across the window holding one 600 pixels wide, of
#: a row per part (banner, greeting, sections, footer), without role attributes (older templates).
NEWSLETTER = (
    '<table width="100%" cellpadding="0" cellspacing="0" border="0"><tr><td align="center">'
    '<table width="600" cellpadding="0" cellspacing="0" border="0">'
    '<tr><td><img src="banner.png" alt="Acme Pumps" width="600"></td></tr>'
    '<tr><td style="padding:20px"><p>Dear customer,</p><p>Here is what changed at Acme this spring.</p>'
    "</td></tr>"
    "<tr><td><h2>New seal kits</h2><p>The XR-200 seal kit now ships with Viton seals.</p></td></tr>"
    '<tr><td height="20"></td></tr>'
    "<tr><td><h2>Service hours</h2><p>The service desk answers calls from 7 am to 7 pm.</p></td></tr>"
    f"<tr><td><h2>Prices</h2><p>New prices apply from 1 May.</p>{SEALS_TH}</td></tr>"
    "<tr><td><p>Thank you for choosing Acme.</p></td></tr>"
    '<tr><td style="font-size:11px"><a href="/unsubscribe">Unsubscribe</a> | '
    '<a href="/privacy">Privacy</a></td></tr>'
    "</table></td></tr></table>"
)
NEWSLETTER_READ = (
    "Dear customer,\n\nHere is what changed at Acme this spring.\n\n## New seal kits\n\n"
    "The XR-200 seal kit now ships with Viton seals.\n\n## Service hours\n\n"
    "The service desk answers calls from 7 am to 7 pm.\n\n## Prices\n\nNew prices apply from 1 May.\n\n"
    f"{SEALS_TH_READ}\n\nThank you for choosing Acme."
)
#: A site's page: the logo, the menu beside the page's text, a table of data across the page, a footer.
SITE_PAGE = (
    f"<table width=100%><tr><td colspan=2><img src=logo.png alt=Logo></td></tr>"
    f"<tr>{MENU_CELL}<td><h1>Seal guide</h1>{BEFORE}</td></tr><tr><td colspan=2>{SEALS_5}</td></tr>"
    f"<tr><td colspan=2>{AFTER}</td></tr><tr><td colspan=2><h2>Ordering</h2><p>Seals are ordered by "
    "part number.</p></td></tr></table>"
)
SITE_PAGE_READ = (
    f"# Seal guide\n\nSeals are replaced at every overhaul of the pump.\n\n{SEALS_5_READ}\n\n"
    "Keep spare seals dry and out of the light.\n\n## Ordering\n\nSeals are ordered by part number."
)


@pytest.mark.parametrize(
    ("main", "read", "headings"),
    [
        (NEWSLETTER, NEWSLETTER_READ, ["New seal kits", "Service hours", "Prices"]),
        (SITE_PAGE, SITE_PAGE_READ, ["Seal guide", "Ordering"]),
    ],
    ids=["e-mail", "site-page"],
)
def test_a_layout_table_of_many_rows_is_read_as_text(
    tmp_path: Path, main: str, read: str, headings: list[str]
) -> None:
    # A layout table of more than three rows was taken for a table of data: the page came out as a
    # Markdown table of one column with a section a cell, no headings, and its table of data as a cell's
    # text ("Kit Price; XR-200 seal kit 45 EUR; ..."). Its rows hold headings with text under them,
    # several paragraphs, a table: the page's parts, not rows of data.
    path = tmp_path / "news.html"
    path.write_text(
        f"<html><head><title>Acme news</title></head><body>{main}</body></html>", encoding="utf-8"
    )
    [page] = load(path).pages
    assert page.text == read
    assert [section.heading for section in page.sections] == headings


@pytest.mark.parametrize("role", ["presentation", "none"])
def test_a_table_marked_as_presentation_is_read_as_text(tmp_path: Path, role: str) -> None:
    # role="presentation" (or "none") says the table lays the page out, as e-mail templates mark every
    # table they nest: rows of a picture beside a line of text were read as a table of data.
    lines = [
        "The XR-200 seal kit now ships with Viton seals.",
        "The service desk answers calls from 7 am to 7 pm.",
        "New prices apply from 1 May.",
        "Our Leeds depot moves to Mill Road in June.",
    ]
    rows = "".join(
        f'<tr><td><img src="{n}.png" alt=""></td><td>{line}</td></tr>' for n, line in enumerate(lines)
    )
    text = _page_with(tmp_path, f'<table role="{role}" width="100%">{rows}</table>')
    assert "\n\n".join(lines) in text and "|" not in text


def test_a_box_of_one_cell_and_a_column_of_blocks_are_read_as_text(tmp_path: Path) -> None:
    # A table of one cell (an address box) holds no value beside a name, and a column of a picture over
    # its paragraph is two parts of a page: each was a Markdown row of its own, "| ... |".
    text = _page_with(
        tmp_path,
        "<table><tr><td>Acme Pumps Ltd, 1 Mill Road, Leeds</td></tr></table><table><tr><td><img src=desk.png>"
        "</td></tr><tr><td><p>The service desk answers calls from 7 am to 7 pm.</p></td></tr></table>",
    )
    assert (
        "Acme Pumps Ltd, 1 Mill Road, Leeds\n\nThe service desk answers calls from 7 am to 7 pm.\n\n"
        "Check them yearly."
    ) in text


@pytest.mark.parametrize(
    ("table", "read"),
    [
        # Cells of links to the parts' pages, no header row.
        (f"<table>{PART_LINKS}</table>", PART_LINKS_READ),
        # A header row over cells holding a heading alone and several paragraphs, as a wiki writes them.
        (
            "<table><tr><th>Part</th><th>Notes</th></tr>"
            + "".join(
                f"<tr><td><h4>AN{n}</h4></td><td><p>Washer size {n}.</p><p>Steel.</p></td></tr>"
                for n in range(960, 965)
            )
            + "</table>",
            "| Part | Notes |\n|---|---|\n| AN960 | Washer size 960. Steel. |",
        ),
        # A row across the table naming the rows under it.
        (
            "<table><tr><td colspan=2>Flange bolts</td></tr>"
            + "".join(f"<tr><td>M{n}</td><td><p>{n * 3} Nm</p></td></tr>" for n in (6, 8, 10, 12))
            + "</table>",
            "| M6 | 18 Nm |\n| M8 | 24 Nm |",
        ),
    ],
    ids=["links", "wiki", "row-across"],
)
def test_a_table_of_data_of_many_rows_stays_a_table(tmp_path: Path, table: str, read: str) -> None:
    # What makes a table of many rows one of layout (headings with text under them, tables in cells,
    # rows of one cell holding blocks) is not what a table of data's cells hold.
    assert read in _page_with(tmp_path, table)


FRAMES = [
    *('<div class="post">', '<section class="entry">', '<div itemprop="articleBody">'),
    *('<div id="articleContent">', '<div id="entry-content">', '<div class="post-content x">'),
    *('<div class="ArticleContent">', "<article>", '<div role="article">', '<div id="story">'),
    *('<div class="postarea">', '<div class="text">', '<div class="cell">', '<div class="x FullText">'),
    *('<div id="primary">', '<div class="article wide">', '<div class="single-post">', '<div id="content">'),
    *('<div class="content">', '<section id="content-main">', '<div class="content__body">'),
    *('<div id="Main-Content">', '<div class="page-content">', '<div class="main-wrap">'),
    *('<section id="main">', '<div role="main">', "<main>"),
]
NOT_FRAMES = [
    *('<div class="wrapper">', '<div id="bottom">', '<span class="content">', '<div class="contents">'),
    *('<p class="post">', '<div class="sidebar-main">', '<div id="domain" role="note">'),
]


@pytest.mark.parametrize("opening", FRAMES + NOT_FRAMES)
def test_the_frames_citeline_looks_for_are_those_trafilatura_reads_the_main_text_in(opening: str) -> None:
    # citeline wraps a page's body in a <main> when trafilatura would find no frame for its main text;
    # it keeps its own copy of the frames (trafilatura's BODY_XPATH is no public name), which must
    # agree with trafilatura's while it has them.
    import trafilatura
    from trafilatura import xpaths

    from citeline.load.html import _has_frame

    if not hasattr(xpaths, "BODY_XPATH"):
        pytest.skip("this trafilatura has no BODY_XPATH to compare with")
    tag = opening[1:].split(">")[0].split()[0]
    tree = trafilatura.load_html(f"<html><body>{opening}<p>Prime the pump.</p></{tag}></body></html>")
    theirs = any(len(expression(tree)) > 0 for expression in xpaths.BODY_XPATH)
    assert _has_frame(tree) == theirs == (opening in FRAMES)


def test_web_pages_load_when_trafilatura_no_longer_has_its_internal_frame_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading imported trafilatura.xpaths.BODY_XPATH, which is no public name: a release without it
    # failed every web page with an ImportError.
    from trafilatura import xpaths

    monkeypatch.delattr(xpaths, "BODY_XPATH")
    path = tmp_path / "pump.html"
    path.write_text(_plain_page("<tr><td>M8</td><td>25 Nm</td></tr>", _ITEMS), encoding="utf-8")
    [page] = load(path).pages
    assert [section.heading for section in page.sections] == [
        "Pump maintenance",
        "Checklist",
        "Torque values",
    ]
    assert "| M8 | 25 Nm |" in page.text and "Privacy policy" not in page.text


def _page_with(tmp_path: Path, table: str) -> str:
    path = tmp_path / "specs.html"
    path.write_text(
        "<html><head><title>P100 specs</title></head><body><main><h1>P100 specs</h1>"
        f"<p>Values for the housings of the P100 pumps.</p>{table}<p>Check them yearly.</p>"
        "</main></body></html>",
        encoding="utf-8",
    )
    [page] = load(path).pages
    return page.text


def test_a_tables_header_rows_name_its_columns_and_a_cell_spanning_rows_is_in_each_row(
    tmp_path: Path,
) -> None:
    # The second header row ("Dry | Oiled" under "Torque") was a row of values, under "Torque" and a
    # nameless column; the row under a cell spanning two rows slid one column left ("| oiled | 22 Nm |",
    # "oiled" under "Bolt"); the caption was a header row of its own over the real one.
    text = _page_with(
        tmp_path,
        "<table><caption>Housing bolts</caption>"
        "<thead><tr><th rowspan=2>Bolt</th><th rowspan=2>Grade</th><th colspan=2>Torque</th></tr>"
        "<tr><th>Dry</th><th>Oiled</th></tr></thead><tbody>"
        "<tr><td rowspan=2>M8</td><td>8.8</td><td>25 Nm</td><td>22 Nm</td></tr>"
        "<tr><td>10.9</td><td>36 Nm</td><td>32 Nm</td></tr>"
        "<tr><td colspan=4>Frame bolts</td></tr>"
        "<tr><td>M10</td><td>8.8</td><td>49 Nm</td><td>44 Nm</td></tr></tbody></table>",
    )
    assert (
        "Housing bolts\n\n| Bolt | Grade | Torque Dry | Torque Oiled |\n|---|---|---|---|\n"
        "| M8 | 8.8 | 25 Nm | 22 Nm |\n| M8 | 10.9 | 36 Nm | 32 Nm |\n| Frame bolts |  |  |  |\n"
        "| M10 | 8.8 | 49 Nm | 44 Nm |\n"
    ) in text


def test_a_table_without_header_cells_is_read_under_its_first_row(tmp_path: Path) -> None:
    # With no <th>, trafilatura wrote no "|---|" row: no Markdown table, so no chunk of its later rows
    # was read under its column names.
    text = _page_with(
        tmp_path,
        "<table><tr><td>Seal</td><td>Material</td></tr><tr><td>Shaft seal</td><td>Viton</td></tr>"
        "<tr><td>Casing gasket</td><td>EPDM</td></tr></table>",
    )
    assert "| Seal | Material |\n|---|---|\n| Shaft seal | Viton |\n| Casing gasket | EPDM |" in text


def test_a_table_inside_a_cell_is_that_cells_text(tmp_path: Path) -> None:
    # It was lifted out after its table ("| M10 |  | 44 Nm |", then a table of its own).
    text = _page_with(
        tmp_path,
        "<table><tr><th>Bolt</th><th>Dry</th><th>Oiled</th></tr><tr><td>M6</td><td>10 Nm</td>"
        "<td>9 Nm</td></tr><tr><td>M8</td><td>25 Nm</td><td>22 Nm</td></tr><tr><td>M10</td><td><table>"
        "<tr><td>49 Nm</td><td>new</td></tr><tr><td>46 Nm</td><td>reused</td></tr>"
        "</table></td><td>44 Nm</td></tr></table>",
    )
    assert "| M10 | 49 Nm new; 46 Nm reused | 44 Nm |\n\nCheck them yearly." in text


def test_a_table_naming_each_row_in_a_header_cell_is_a_line_per_row(tmp_path: Path) -> None:
    # Its first row was taken for the header row: "Version" named the column of "License".
    text = _page_with(
        tmp_path,
        "<table><tr><th>Version</th><td>2.1</td></tr><tr><th>License</th><td>MIT</td></tr>"
        "<tr><th>Python</th><td>3.11, 3.12</td></tr></table>",
    )
    assert "Version: 2.1\n\nLicense: MIT\n\nPython: 3.11, 3.12\n\nCheck them yearly." in text


def test_a_data_sheet_of_small_tables_keeps_every_table(tmp_path: Path) -> None:
    # A page holding more tables than paragraphs was handed to readability whenever that found any text
    # (trafilatura's threshold is twice the minimum size citeline sets to 1), and readability dropped the
    # first of two small tables.
    path = tmp_path / "p100.html"
    path.write_text(
        "<html><head><title>P100 data sheet</title></head><body><nav><a href=/>Home</a> <a href=/pumps>"
        "Pumps</a></nav><main><h1>P100 data sheet</h1><p>Values for the P100 centrifugal pumps.</p>"
        "<h2>Torques</h2><table><tr><th>Bolt</th><th>Torque</th></tr><tr><td>M8</td><td>25 Nm</td></tr>"
        "</table><h2>Seals</h2><table><tr><th>Seal</th><th>Material</th></tr><tr><td>Shaft seal</td>"
        "<td>Viton</td></tr></table></main><footer>Copyright 2024 Acme Pumps</footer></body></html>",
        encoding="utf-8",
    )
    [page] = load(path).pages
    assert page.text == (
        "# P100 data sheet\n\nValues for the P100 centrifugal pumps.\n\n## Torques\n\n| Bolt | Torque |\n"
        "|---|---|\n| M8 | 25 Nm |\n\n## Seals\n\n| Seal | Material |\n|---|---|\n| Shaft seal | Viton |"
    )


def test_a_glossary_keeps_each_term_with_its_definition(tmp_path: Path) -> None:
    # Terms and definitions were items of one list ("- NPSH", "- Net positive suction head ..."): a
    # chunk could end between a term and its definition, and nothing said which defined what.
    path = tmp_path / "glossary.html"
    path.write_text(
        "<html><head><title>Glossary</title></head><body><main><h1>Glossary</h1><p>Terms of this manual.</p>"
        "<dl><dt>NPSH</dt><dd><p>Net positive suction head.</p><p>Measured at the inlet flange.</p></dd>"
        "<dt>BEP</dt><dt>Best point</dt><dd>Best efficiency point.</dd><dd>The <i>peak</i> of the curve</dd>"
        "<dt>Head</dt><dd>Lift in metres</dd><dd>pressure over density</dd></dl>"
        # An API reference's definitions hold lists of their own: left as it was.
        "<h2>API</h2><dl><dt><code>prime(pump)</code></dt><dd><p>Prime the pump.</p><dl><dt>Parameters</dt>"
        "<dd><ul><li>pump - the pump</li></ul></dd></dl></dd></dl></main></body></html>",
        encoding="utf-8",
    )
    [page] = load(path).pages
    assert page.text.startswith(
        "# Glossary\n\nTerms of this manual.\n\n"
        "- NPSH: Net positive suction head. Measured at the inlet flange.\n"
        "- BEP, Best point: Best efficiency point. The peak of the curve\n"
        "- Head: Lift in metres; pressure over density\n\n## API\n\n- `prime(pump)`\n- Prime the pump.\n"
    )


INFOBOX = (
    '<table class="infobox"><tr><th colspan="2">Albert Einstein</th></tr><tr><td colspan="2">'
    '<img src="einstein.jpg" alt="">Einstein in 1921</td></tr><tr><th>Born</th><td>14 March 1879<br>Ulm</td>'
    '</tr><tr><th>Died</th><td>18 April 1955</td></tr><tr><th colspan="2">Scientific career</th></tr>'
    "<tr><th>Fields</th><td>Physics</td></tr></table>"
)


def test_an_infobox_is_its_title_and_a_line_per_row(tmp_path: Path) -> None:
    # Its name across the table was taken for the column names ("| Albert Einstein | Albert Einstein |"),
    # and its picture's caption for a row of values under them.
    text = _page_with(tmp_path, INFOBOX)
    assert (
        "Albert Einstein\n\nEinstein in 1921\n\nBorn: 14 March 1879 Ulm\n\nDied: 18 April 1955\n\n"
        "Scientific career\n\nFields: Physics\n\nCheck them yearly."
    ) in text


def test_a_grid_of_pictures_is_not_read_under_its_first_row(tmp_path: Path) -> None:
    # A grid of people (a picture and a name a cell, no <th>): its first row was made the column names.
    cells = [f'<td><img src="{name}.png" alt=""><br>{name}</td>' for name in ("Ada", "Bo", "Cy", "Di")]
    text = _page_with(tmp_path, f"<table><tr>{cells[0]}{cells[1]}</tr><tr>{cells[2]}{cells[3]}</tr></table>")
    assert "|---|" not in text and "Ada" in text and "Di" in text


@pytest.mark.parametrize(
    "rows",
    [
        f"<tr>{MENU_CELL}<td>{PRIMING}</td></tr>",
        f"<tr><td><img src=logo.png alt=Logo></td><td></td></tr><tr>{MENU_CELL}<td>{PRIMING}</td></tr>"
        f"<tr>{FOOTER}</tr>",
    ],
    ids=["menu-and-text", "logo-menu-and-text-footer"],
)
def test_a_menu_beside_plain_text_is_no_table_row(tmp_path: Path, rows: str) -> None:
    # A menu's cell beside a cell of text with no paragraph tags: nothing in the text's cell said layout,
    # and the page was one Markdown row, "| Home Pumps Valves | The pump is primed ... |".
    text = _seal_guide(tmp_path, f"<table width=100%>{rows}</table>")
    assert "|" not in text and not MENU_WORDS & _words(text)
    assert PRIMING in text
