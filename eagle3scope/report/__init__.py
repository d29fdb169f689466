"""A shareable report of one recording: what it says (:mod:`~eagle3scope.report.build`), its plots
(:mod:`~eagle3scope.report.plots`), written as markdown or HTML (:mod:`~eagle3scope.report.render`);
and the request timeline as a Chrome trace (:mod:`~eagle3scope.report.timeline`)."""
