"""The explorer over a recorded grid: builds, redraws when a control moves, draws the default once; no GPU."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from streamalloc import widgets  # noqa: E402

try:
    import ipywidgets
except ImportError:  # the course's requirements have it; the fallback test below runs without it
    ipywidgets = None
needs_ipywidgets = pytest.mark.skipif(ipywidgets is None, reason="ipywidgets is not installed")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
GRID = {(t, s, trim): [t + s, t + s + (0 if trim else 5), 2 * s] for t in (0, 64, 256) for s in (16, 64) for trim in (0, 1)}
CONTROLS = {"threshold": [("0", 0), ("64 MiB", 64), ("256 MiB", 256)], "block size": [16, 64],
            "trim to 0 at the end": [False, True]}


class Recorded:
    """Stands for a lesson.measure Result: .data is the grid, .label names where it came from."""

    data = GRID
    label = "NVIDIA Test GPU, replayed from a recording of 2026-01-01"


def make_plot(calls):
    def plot(threshold, size, trim, data=None, label=None):
        calls.append(((threshold, size, trim), data, label))
        fig, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot(data)
        ax.set_title(f"{threshold} {size} {trim}")
        return fig
    return plot


def image(explorer):
    """The plot the explorer shows now (its image output, which a redraw updates in place)."""
    return explorer.shown["data"]["image/png"]


class Displays:
    """IPython's display, captured as a front end would receive it: each display_data and update_display_data."""

    def __init__(self, monkeypatch):
        from IPython.core.interactiveshell import InteractiveShell

        self.created = not InteractiveShell.initialized()  # then cleared after the test (the `displays` fixture)
        self.shell = InteractiveShell.instance()
        self.messages = []
        monkeypatch.setattr(self.shell.display_pub, "publish",
                            lambda data, metadata=None, source=None, *, transient=None, update=False, **kw:
                            self.messages.append({"data": data, "transient": transient or {}, "update": update}))


@pytest.fixture
def displays(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    shown = Displays(monkeypatch)
    yield shown
    if shown.created:  # leave no shell behind for the tests that make their own
        InteractiveShell.clear_instance()


@needs_ipywidgets
def test_builds_the_controls_and_draws_the_default_once():
    calls, figures = [], plt.get_fignums()
    ex = widgets.Explorer(Recorded(), make_plot(calls), CONTROLS, default=(256, 64, True))
    assert calls == [((256, 64, True), GRID[(256, 64, True)], Recorded.label)]  # tuple keys: no key function
    assert plt.get_fignums() == figures, "the drawn figure is closed, not left for the inline backend"

    c = ex.controls
    assert isinstance(c["threshold"], ipywidgets.SelectionSlider) and c["threshold"].value == 256
    assert c["threshold"].label == "256 MiB" and [lb for lb, _ in c["threshold"].options] == ["0", "64 MiB", "256 MiB"] and not c["threshold"].continuous_update
    assert c["block size"].options == (("16", 16), ("64", 64)) and c["block size"].value == 64
    assert isinstance(c["trim to 0 at the end"], ipywidgets.Checkbox) and c["trim to 0 at the end"].value is True
    assert ex.now is None, "no run function: no 'run it now' box"
    sliders, switches, said = ex.box.children
    assert [list(row.children) for row in sliders.children] == [[c["threshold"], ex.readouts["threshold"]],
                                                                 [c["block size"], ex.readouts["block size"]]]
    assert list(switches.children) == [c["trim to 0 at the end"]]

    assert said is ex.said and ex.said.value == "" and ex.message == "", "the last row says what a redraw printed"
    assert ex.draws == 1 and len(calls) == 1


@needs_ipywidgets
def test_redraws_when_a_control_moves():
    calls = []
    ex = widgets.Explorer(Recorded(), make_plot(calls), CONTROLS, default=(0, 16, False))
    first = image(ex)
    ex.controls["block size"].value = 64
    assert calls[-1][:2] == ((0, 64, False), GRID[(0, 64, False)]) and ex.draws == 2
    assert image(ex) != first
    ex.controls["trim to 0 at the end"].value = True
    ex.controls["threshold"].value = 64
    assert [setting for setting, _, _ in calls] == [(0, 16, False), (0, 64, False), (0, 64, True), (64, 64, True)]
    assert ex.setting == (64, 64, True)


@needs_ipywidgets
def test_string_keys_and_a_setting_that_was_not_recorded():
    grid = {f"{t}|{s}|{int(trim)}": data for (t, s, trim), data in GRID.items() if s == 16}
    key = lambda t, s, trim: f"{t}|{s}|{int(trim)}"  # noqa: E731  JSON keys, as lesson.measure records them
    ex = widgets.Explorer(grid, make_plot([]), CONTROLS, default=(0, 16, True), key=key, label="recorded")
    ex.controls["block size"].value = 64  # not in the grid: the row under the controls says so, the kernel goes on
    assert "LookupError" in ex.message and "block size 64" in ex.message and "LookupError" in ex.said.value
    ex.controls["block size"].value = 16
    assert image(ex)
    with pytest.raises(LookupError, match="holds nothing"):  # the default must be there: raises in the cell
        widgets.Explorer(grid, make_plot([]), CONTROLS, default=(0, 64, True), key=key)
    with pytest.raises(ValueError, match="not one of its options"):
        widgets.Explorer(grid, make_plot([]), CONTROLS, default=(1, 16, True), key=key)


@needs_ipywidgets
@pytest.mark.parametrize("live", [False, True])
def test_run_it_now_only_when_live(live):
    calls, runs = [], []

    def run(t, s, trim):
        runs.append((t, s, trim))
        return [9, 9, 9]

    ex = widgets.Explorer(Recorded(), make_plot(calls), CONTROLS, default=(0, 16, True), run=run, live=live,
                          run_label="NVIDIA Test GPU, live")
    assert ex.now.disabled is not live
    assert ex.now.description == (widgets.RUN_NOW if live else widgets.RUN_NOW_OFF)
    assert list(ex.box.children[1].children) == [ex.controls["trim to 0 at the end"], ex.now]
    ex.now.value = True
    if live:
        assert runs == [(0, 16, True)] and calls[-1][1:] == ([9, 9, 9], "NVIDIA Test GPU, live")
    else:  # replay: the grid, never the GPU
        assert runs == [] and calls[-1][1:] == (GRID[(0, 16, True)], Recorded.label)


def test_without_ipywidgets_it_draws_the_default_once(monkeypatch, capsys):
    monkeypatch.setattr(widgets, "_ipywidgets", lambda: None)
    calls = []
    ex = widgets.Explorer(Recorded(), make_plot(calls), CONTROLS, default=(64, 16, False))
    assert len(calls) == 1 and ex.box is None and ex.controls == {}
    assert "ipywidgets is not installed" in capsys.readouterr().out
    assert "plot(threshold, size, trim)" in ex._call_hint()
    data, _ = ex._repr_mimebundle_()
    assert "image/png" in data and WIDGET_VIEW not in data and len(calls) == 1


@needs_ipywidgets
def test_the_readout_shows_the_whole_label():
    """A slider's own readout has a fixed width that cut "UINT64_MAX" off: a Label beside it names the choice."""
    controls = {"threshold": [("0", 0), ("UINT64_MAX", 2**64 - 1)], "block size": [16, 64], "trim": [False, True]}
    grid = {(t, s, trim): [1, 2] for t in (0, 2**64 - 1) for s in (16, 64) for trim in (False, True)}
    ex = widgets.Explorer(grid, make_plot([]), controls, default=(0, 16, False))
    assert ex.controls["threshold"].readout is False and ex.readouts["threshold"].value == "0"
    ex.controls["threshold"].value = 2**64 - 1
    assert ex.readouts["threshold"].value == "UINT64_MAX" and ex.setting == (2**64 - 1, 16, False)
    assert ex.controls["threshold"].style.description_width == "initial"


@needs_ipywidgets
def test_a_readout_keeps_its_room_and_a_gap_before_the_next_slider():
    """03's explorer showed "UINT64_MAXblock size": each readout is as wide as its longest label, with a gap after it
    (ipywidgets 7, Colab's, and 8 both honour a Label's layout)."""
    controls = {"threshold": [("0", 0), ("UINT64_MAX", 2**64 - 1)], "block size": [("16 KiB", 16), ("64 KiB", 64)],
                "trim": [False, True]}
    grid = {(t, s, trim): [1, 2] for t in (0, 2**64 - 1) for s in (16, 64) for trim in (False, True)}
    ex = widgets.Explorer(grid, make_plot([]), controls, default=(0, 16, False))
    for name, longest in (("threshold", "UINT64_MAX"), ("block size", "64 KiB")):
        layout = ex.readouts[name].layout
        assert layout.min_width == f"{len(longest) + 1}ch", name
        assert layout.margin.split()[1] not in ("0", "0px") and layout.margin == widgets.READOUT_MARGIN, name
    sliders = ex.box.children[0].children  # one row: each slider beside its readout, the next after the gap
    assert [list(b.children) for b in sliders] == [[ex.controls[n], ex.readouts[n]] for n in ("threshold", "block size")]


@needs_ipywidgets
def test_it_displays_the_plot_first_then_the_controls_and_redraws_in_place(displays):
    """What a front end receives, under ipywidgets 7 (Colab, classic Notebook 6.5) and 8: the plot as an ordinary
    image output (shown even where the widget front end draws nothing), then the controls; a move of a control
    updates that same image output."""
    shown = displays
    ex = widgets.Explorer(Recorded(), make_plot([]), CONTROLS, default=(0, 16, False))
    ex.show()
    plot, controls = shown.messages
    assert set(plot["data"]) == {"image/png", "text/plain"} and plot["data"]["image/png"] == image(ex)
    assert WIDGET_VIEW not in plot["data"] and controls["data"][WIDGET_VIEW]["model_id"] == ex.box.model_id
    first = image(ex)
    ex.controls["threshold"].value = 256  # it still updates after being shown
    update = shown.messages[-1]
    assert update["update"] and update["transient"]["display_id"] == plot["transient"]["display_id"]
    assert update["data"]["image/png"] == image(ex) != first and ex.draws == 2 and ex.setting == (256, 16, False)


def widget_tree(widget):
    """A widget and every widget under it, however deeply boxed."""
    yield widget
    for child in getattr(widget, "children", ()):
        yield from widget_tree(child)


@needs_ipywidgets
@pytest.mark.parametrize("run", [None, lambda t, s, trim: [1, 2]])
def test_no_output_widget_anywhere(run, displays):
    """widgetsnbextension 3.6.10 (classic Notebook 6.5, Colab's closest front end) cannot create an Output widget's
    model ('_deserialize_state is not a function'), and that failure sometimes took the controls with it when a cell
    ran by "Run all": no Output is made or shown, and the box holds every control."""
    made = []
    real = ipywidgets.Output.__init__
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ipywidgets.Output, "__init__", lambda self, *a, **k: (made.append(self), real(self, *a, **k))[1])
        ex = widgets.Explorer(Recorded(), make_plot([]), CONTROLS, default=(0, 16, False), run=run)
        ex.show()
    assert made == [], "an ipywidgets Output was made"
    tree = list(widget_tree(ex.box))
    assert not [w for w in tree if isinstance(w, ipywidgets.Output)], "an Output inside the controls' box"
    assert all(c in tree for c in [*ex.controls.values(), *ex.readouts.values()] + ([ex.now] if run else []))
    shown = [m["data"][WIDGET_VIEW]["model_id"] for m in displays.messages if WIDGET_VIEW in m["data"]]
    assert shown == [ex.box.model_id], "only the controls' box is displayed as a widget"
    ex.controls["block size"].value = 64
    assert ex.message == "" and ex.setting == (0, 64, False)


@needs_ipywidgets
def test_what_a_redraw_prints_is_shown_escaped_under_the_controls():
    def noisy(threshold, size, trim, data=None, label=None):
        print("<b>chosen</b>", threshold)
        return make_plot([])(threshold, size, trim, data=data, label=label)
    ex = widgets.Explorer(Recorded(), noisy, CONTROLS, default=(0, 16, False))
    ex.controls["threshold"].value = 64
    assert ex.message == "<b>chosen</b> 64\n" and "&lt;b&gt;chosen&lt;/b&gt; 64" in ex.said.value
    assert "<b>" not in ex.said.value


@needs_ipywidgets
def test_an_error_in_a_redraw_keeps_the_last_plot(displays):
    shown = displays
    grid = dict(GRID)
    del grid[(64, 16, False)]
    ex = widgets.Explorer(grid, make_plot([]), CONTROLS, default=(0, 16, False))
    ex.show()
    before = len(shown.messages)
    ex.controls["threshold"].value = 64
    assert len(shown.messages) == before and "LookupError" in ex.message


def test_without_ipywidgets_it_displays_the_plot_alone(monkeypatch, displays):
    monkeypatch.setattr(widgets, "_ipywidgets", lambda: None)
    shown = displays
    widgets.Explorer(Recorded(), make_plot([]), CONTROLS, default=(64, 16, False)).show()
    assert [set(m["data"]) for m in shown.messages] == [{"image/png", "text/plain"}]


@needs_ipywidgets
def test_named_choices_are_a_dropdown_that_lists_each_name_whole():
    """08's traces and allocators were sliders whose readout cut the names: names (not numbers) are a dropdown, wide
    enough for its longest name; numbers stay a slider with the chosen label beside it."""
    names = ["PyTorch training step", "cudaMallocAsync, release threshold UINT64_MAX"]
    controls = {"trace": names, "block size": [16, 64], "trim": [False, True]}
    grid = {(n, s, t): [len(n), s] for n in names for s in (16, 64) for t in (False, True)}
    calls = []

    def plot(name, size, trim, data=None, label=None):
        calls.append((name, size, trim))
        return make_plot([])(0, size, trim, data=data, label=label)

    ex = widgets.Explorer(grid, plot, controls, default=(names[0], 16, False))
    trace = ex.controls["trace"]
    assert isinstance(trace, ipywidgets.Dropdown) and "trace" not in ex.readouts
    assert list(trace.options) == [(n, n) for n in names] or list(trace.options) == names
    assert int(trace.layout.width.rstrip("ch")) >= len("trace") + max(map(len, names))
    assert isinstance(ex.controls["block size"], ipywidgets.SelectionSlider) and ex.readouts["block size"].value == "16"
    trace.value = names[1]
    assert calls[-1] == (names[1], 16, False) and ex.setting == (names[1], 16, False)
    rows = ex.box.children
    assert trace in rows[0].children and ex.controls["trim"] in rows[1].children  # choices first, then switches
