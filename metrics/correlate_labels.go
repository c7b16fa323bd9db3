package metrics

// GroupResourceOther is the value of LabelGroup and LabelResource on the correlate metrics for
// every group/resource no apiserver was seen to serve: clients choose their paths, and each
// made-up one would otherwise be a series of its own for the life of the process.
const GroupResourceOther = "other"
