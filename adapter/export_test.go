package adapter

// WriteCost is writeCost for the external tests.
var WriteCost = writeCost
