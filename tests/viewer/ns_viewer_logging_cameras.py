"""``ns-viewer`` as its console script runs it (same arguments), printing each page's camera on every camera
message as ``page camera {"position": [...], "wxyz": [...]}`` (viser's units and convention): what
tests/viewer/test_browser.py checks the page opened at. Not collected by pytest (no ``test_`` prefix)."""

from __future__ import annotations

import json

from nerfstudio.scripts.viewer import run_viewer


class CameraLoggingViewer(run_viewer.ViewerState):
    """nerfstudio's viewer, logging its pages' cameras after every handler nerfstudio and the model added."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)

        @self.viser_server.on_client_connect
        def _(client) -> None:
            @client.camera.on_update
            def _(camera) -> None:
                pose = {"position": [float(v) for v in camera.position], "wxyz": [float(v) for v in camera.wxyz]}
                print("page camera " + json.dumps(pose), flush=True)


if __name__ == "__main__":
    run_viewer.ViewerState = CameraLoggingViewer  # type: ignore[misc]
    run_viewer.entrypoint()
