"""Platform reports (REPORT_GENERATE): the figures computed from the period's rows (`figures`),
what a report holds (`data`), its HTML page (`render`) and charts (`charts`), and where reports
are kept with the database reads behind them (`store`)."""
